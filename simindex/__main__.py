from simindex.cli import app

app(prog_name="simindex")
