"""SilvanForge's GPU backend, shared by the ``cuda`` and ``amd`` targets (silvanforge-gpu).

A library the GPU target plugins depend on; it registers no target itself, and adds one command,
``forge tune-gpu`` (entry point ``silvanforge.commands``).  One obvious place for each concern:

- :mod:`silvanforge_gpu.lowering`: MIR -> LIR with loops on GPU threads (:func:`lower_gpu`, a GPU
  target's ``lower``): the core's walk generator with a placement of its own (shared memory,
  barriers, folds across threads), by composition;
- :mod:`silvanforge_gpu.c_dialect`: LIR -> C, one emitter for CUDA C and OpenCL C;
- :mod:`silvanforge_gpu.target`: :class:`~silvanforge_gpu.target.GpuTarget`, the base of the GPU
  targets (kind ``gpu``, the template as default schedule, :func:`lower_gpu`, the C as source);
- :mod:`silvanforge_gpu.runtime`: :class:`~silvanforge_gpu.runtime.GpuKernel`, what every GPU
  kernel (a :class:`silvanforge.runtime.kernel.Kernel`) does around its launches (device buffers,
  copies, the kernels of a module in order); a target subclasses it with its API's spelling;
- :mod:`silvanforge_gpu.template`: the GPU template schedule (the SilvanForge paper draft,
  section 'Exploring the Schedule Space'), the targets' default and the named schedule
  ``gpu-template``;
- :mod:`silvanforge_gpu.explore` and :mod:`silvanforge_gpu.cli`: Algorithm 1, timing the template's
  candidates on the device (``forge tune-gpu``).

A GPU target plugin subclasses :class:`~silvanforge_gpu.target.GpuTarget` (its C dialect, whether
it runs here, how it compiles) and lists :func:`silvanforge_gpu.target.silvanforge_schedules` as
its own hook (the template's named schedules).
"""
