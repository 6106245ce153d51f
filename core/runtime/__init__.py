"""Running compiled code: the kernel contract, threads and row chunks, output transforms, run-time settings, and the compiled model users hold."""
