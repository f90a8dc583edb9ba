"""The Responses door: OpenAI's Responses API, with its stored responses (compat/doors.py)."""
