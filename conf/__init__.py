"""Hydra config groups; importing the package registers their typed schemas (conf/schema/, one module a group)."""

from conf.schema import register

register()
