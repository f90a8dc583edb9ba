"""The toy door: a dialect of one route (POST /v1/toy/say) made by following docs/architecture.md "Doors" step
by step, served only by tests/compat/test_adding_a_door.py (a fixture, not a feature)."""
