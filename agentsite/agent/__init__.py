"""The agent runtime: providers, tools, the loop. Imports no facet app; facets plug in through registries."""
