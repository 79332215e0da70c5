"""`new-recipe`: a recipe for a vLLM release written from the release's own sdist.

sdist.py reads the few files it needs, facts.py and cmake_facts.py turn them into facts,
patch_check.py tries the shipped patches, inherit.py takes what no sdist holds from the shipped
recipes, render.py writes the TOML and new_recipe.py runs it all.
"""
