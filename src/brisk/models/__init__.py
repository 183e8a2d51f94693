from brisk.models.classifier import ImageClassifier

__all__ = ["ImageClassifier"]
