"""Hydra config groups; importing the package registers their typed schemas (conf/schema.py)."""

from conf.schema import register

register()
