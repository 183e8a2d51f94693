from brisk.callbacks.speed import SpeedMeter

__all__ = ["SpeedMeter"]
