//! TEMPORARY stand-in until config_source.rs lands.
use std::path::PathBuf;
use crate::core::config::SourceFile;
pub enum ConfigLocation { Path(PathBuf), Runtime { root: PathBuf, subdirectory: PathBuf, app_directory: PathBuf, watch_root: bool, ignore_dotfiles: bool } }
#[derive(Debug, thiserror::Error)]
#[error("stub")]
pub struct SourceError;
pub fn read_sources(location: &ConfigLocation) -> Result<Vec<SourceFile>, SourceError> {
    match location { ConfigLocation::Path(p) => Ok(vec![SourceFile { name: p.display().to_string(), text: std::fs::read_to_string(p).map_err(|_| SourceError)? }]), _ => Err(SourceError) }
}
