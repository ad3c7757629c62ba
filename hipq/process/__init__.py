"""A running hipq process: its wiring, its background activities, and how it stops."""
