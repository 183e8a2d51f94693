from brisk.utils.lazy import exports

__all__, __getattr__, __dir__ = exports(__name__, {"ImageClassifier": ".classifier"})
