//! The repository held to its word: the deployment files in `deploy/` (the Kubernetes manifests
//! and the Grafana dashboard, checked against a live floodgate; the Envoy Gateway and Istio
//! ext_authz overlays, against those projects' APIs), the README and guides (links that resolve, shell blocks that
//! run), the layers of the source, its module files and the length of its functions.

mod deploy_dashboard;
mod deploy_istio_ext_authz;
mod deploy_istio_sample;
mod deploy_kuadrant_limitador;
mod deploy_manifests;
mod deploy_under_envoy_gateway;
mod docs_links;
mod function_lengths;
mod layers;
mod module_files;
mod reference_env;
