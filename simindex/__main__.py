from simindex.cli import run

run()
