"""`python -m ole.cli` = the `ole` command."""
import sys

from ole.cli import main

sys.exit(main())
