"""polyops' code generator (scripts/generate_wrappers.py is its entry point;
docs/contributing/codegen.md)."""
