"""Reading input files and writing outputs."""
