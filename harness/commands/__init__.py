"""One thin module per ``tokenfactory`` subcommand: parse the arguments, call one function, return an exit code."""
