from sqlchorus.interfaces.cli import cli

cli(prog_name="sqlchorus")
