"""The operator's tools: the command line, the console (tui/), doctor, and the words both use to
describe calls (present.py). The only part of the package that talks to a person."""
