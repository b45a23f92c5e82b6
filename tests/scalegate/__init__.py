"""Tests of the Elastic ScaleGate (scalegate/)."""
