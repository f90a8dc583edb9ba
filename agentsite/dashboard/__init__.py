"""The built-in web dashboard: the page view, its template and its static files (an app of its own, so its
templates/ and static/ folders are found by Django's app loaders; the URLs the browser sees are unchanged)."""
