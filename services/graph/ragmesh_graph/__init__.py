"""ragmesh graph service: entities and their relations, one graph per collection, walked by assistants.

One graph pod holds the graphs of one data directory (<data_dir>/graph/<collection>/, embedded LadybugDB that
this process alone opens for writing: one writer per collection); it stops at the graph: the entities'
searchable text is the indexer's, in the vector store. A Neo4j adapter would implement the same `GraphStore`
Protocol (store/base.py) over Bolt with the same Cypher subset.
"""
