"""What ``predict`` accepts, converted to the rows a kernel reads: arrays, data frames by schema, records, categories known by label or by hash, device arrays."""
