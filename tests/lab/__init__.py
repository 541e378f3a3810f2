"""Unit tests of the local lab's own machinery (no Pulsar)."""
