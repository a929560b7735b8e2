"""The run pipeline: an experiment planned into cells, measured on private servers, stored."""
