"""Test doubles: stand-ins for outside services that tests and offline demos run against.

Nothing here is part of a search. ``scripted_server`` is a real HTTP server whose replies are
read from a script; it is not a language model and is named "scripted" wherever it appears.
The product's packages never import this one (``tests/test_layers.py``).
"""
