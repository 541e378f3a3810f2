"""``geoctl``: the GeoSync operator's tool (``geoctl NOUN VERB``, like pulsar-admin and pulsarctl)."""
