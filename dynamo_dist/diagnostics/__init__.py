"""Reports about what dynamo_dist does: coverage tables, stock comparison."""
