"""The GeoSync agent: one process per region that keeps replicated subscriptions in step.

It talks only to its own region (brokers, admin API, ZooKeeper); everything that crosses regions travels
on replicated control topics. Run it with ``python -m geosync_agent --config FILE``.
"""
