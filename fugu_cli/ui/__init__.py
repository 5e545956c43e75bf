"""Everything that prints or reads the terminal: the REPL, rendering, one-shot runs."""
