"""`python -m ole.cli` = the `ole` command (through the same name-conflict check as the script)."""
from ole.entry import ole_main

ole_main()
