"""The Textual console. Everything here runs on the UI thread except the thread workers,
which only talk to the database (through console.db) and post messages back."""
