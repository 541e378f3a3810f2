"""Hypothesis runs without a per-example deadline: on the 2-core CI machine, with labs running beside the unit
tests, an example of a pure function once took over the default 200 ms and failed a test that is about
correctness, not speed (speed is measured by ``bench/``)."""

from hypothesis import settings

settings.register_profile("geosync", deadline=None)
settings.load_profile("geosync")
