"""plan: recipes, targets, compiler and job sizing turned into one frozen BuildPlan."""
