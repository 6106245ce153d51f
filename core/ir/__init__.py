"""The three IRs: HIR (forest of trees), MIR (loop nests), LIR (buffers, loads, arithmetic)."""
