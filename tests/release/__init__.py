"""Checks of what a release is made of, fast enough for every run (the build itself: integration_tests)."""
