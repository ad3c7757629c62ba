"""The ``hipq`` command line: serve, migrate, and an operator's client of the REST API."""
