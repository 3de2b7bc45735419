//! The repository held to its word: the deployment files in `deploy/` (the Kubernetes manifests
//! and the Grafana dashboard, checked against a live floodgate), the README and guides (links
//! that resolve, shell blocks that run), and the layers of the source.

mod deploy_dashboard;
mod deploy_istio_sample;
mod deploy_manifests;
mod docs_links;
mod layers;
mod reference_env;
