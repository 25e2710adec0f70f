from .point_group_v1m1_base import PointGroup

__all__ = ["PointGroup"]
