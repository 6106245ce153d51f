"""The options several ``forge`` commands share (and plugins' commands: ``forge bench``,
``forge serve``), each made anew for each command that takes it, as typer requires."""

from __future__ import annotations

import typer

MODEL_ARG = typer.Argument(..., help="A model file (XGBoost JSON/UBJSON, LightGBM text, CatBoost JSON/.cbm, ONNX), or a "
                                    "compiled artifact saved with `forge compile -o`.",
                          show_default=False)

LEVEL_OPT = typer.Option(None, "--level", "-l", show_default=False, case_sensitive=False,
                        help="hir (the forest), mir (loop nest), lir (buffers and loads), target "
                             "(generated code) or plan (the form answering each band of rows per call).")


def target_opt():
    return typer.Option(None, "--target", "-t",
                        help="Hardware to compile for, a target `forge plugins` lists (default: this machine's CPU).")


def rep_opt():
    return typer.Option(None, "--rep", "-r",
                        help="How trees are laid out in memory, a representation `forge plugins` lists "
                             "(default: the cheapest for the model by the plugins' own estimates).")


def schedule_opt():
    return typer.Option(None, "--schedule", "-s",
                        help="A file holding a schedule, or a canned one: default, xgboost, "
                             "one-tree-at-a-time, tree-parallel, split-trees, tahoe-*, or one a plugin adds "
                             "(`forge show MODEL -l mir` prints one; default: the target's).")


def tile_opt():
    return typer.Option(None, "--tile-size", min=1, max=8,
                        help="Nodes evaluated per walk step (tiled walks, a representation that lays out tiles; "
                             "default 1: node by node).")


def profile_opt():
    return typer.Option(None, "--profile", "-p",
                        help="A profile from `forge profile` (.npz or .json): with --tile-size 2..8 "
                             "skewed trees are tiled by probability; without, the walks that can "
                             "place nodes (sparse) lay out each node's more visited child first.")


def reorder_opt():
    return typer.Option(None, "--reorder",
                        help="Group trees of equal 'depth' or 'peel' depth (shallowest leaf) and peel "
                             "each group's walks (schedule peel-groups unless --schedule).")


def cpu_opt():
    return typer.Option(None, "--cpu",
                        help="The CPU to build code for: native (this host, the default) or a name such as "
                             "x86-64-v3, haswell, skylake-avx512, znver3 (code for a fleet: saved here, run "
                             "where the host has that CPU's features).")


def header_opt():
    return typer.Option(None, "--header/--no-header", show_default=False,
                        help="The CSV's first line is a header of feature names / is a row "
                             "(default: a header when every cell is a name, none a number).")


def cache_opt():
    return typer.Option(None, "--cache",
                        help="A directory (private to you) where compiled machine code is kept and "
                             "reused by later runs and other processes for the same model and options.")


def threads_opt(help: str = "Threads to predict with (default: all usable CPUs)."):
    return typer.Option(None, "--threads", "-j", min=1, help=help)
