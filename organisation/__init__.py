"""The organisation: groups and their members, and who may use what (the access rule of a shareable resource)."""
