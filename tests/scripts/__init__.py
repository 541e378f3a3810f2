"""Tests of the shell scripts under scripts/ (run against stand-in tools, never the real installers)."""
