"""The Messages door: Anthropic's Messages API over every model /v1 serves (compat/doors.py)."""
