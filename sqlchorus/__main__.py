from sqlchorus.cli import cli

cli(prog_name="sqlchorus")
