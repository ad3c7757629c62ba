"""hipq's version, in a module of its own: the package's ``__init__`` loads the public
names of higher layers (``hipq.JobContext``), and whoever needs only the version (the
tracer, the API's schema, the dashboard) imports it from here."""

__version__ = "0.1.0"
