from brisk.utils.lazy import exports

__all__ = ["ImageClassifier"]
__getattr__, __dir__ = exports(__name__, {"ImageClassifier": ".classifier"})
