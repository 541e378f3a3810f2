"""The drift audit on Spark: every copy of every message in every region, joined by origin coordinates.

``source`` reads the regions (the ``pulsar-geo`` data source and the cursors), ``findings`` computes
what ``geosync_core.drift`` defines as DataFrames, ``reporting`` writes the summary and the plot, and
``drift_job`` ties them together (``geoctl audit drift`` and ``spark-submit``).
"""
