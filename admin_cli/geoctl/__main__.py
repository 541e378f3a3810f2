"""``python -m geoctl``."""

from geoctl.cli import main

main()
