"""`leasectl serve`: the console in a browser, each person signed in and working as themselves
(console/operator/web/server.py), one console process per browser tab (console_process.py)."""
