"""Ground helpers every layer may use: atomic files, the JIT switch, host names, numbers for people, process start-up."""
