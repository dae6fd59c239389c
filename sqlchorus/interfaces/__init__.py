"""The interfaces: the command line, the REST API, the MCP server, the viewer, the debugger's
prompt, the graph as `langgraph dev` serves it, and the guard of the HTTP servers."""
