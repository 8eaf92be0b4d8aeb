# The MLflow server of docker/compose.yaml: the official image plus the PostgreSQL driver.
FROM ghcr.io/mlflow/mlflow:v3.17.2
RUN pip install --no-cache-dir "psycopg2-binary>=2.9,<3"
