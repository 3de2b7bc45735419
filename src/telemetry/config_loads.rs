//! A configuration load, counted where both metric sets count it: floodgate's
//! (`floodgate_config_load_*`, `floodgate_rules_loaded`) and the reference's
//! (`ratelimit.service.config_load_*`, when they are on).

/// A configuration with `rules` rules was loaded and swapped in (the first load too).
pub fn reload_succeeded(rules: usize) {
    if let Some(metrics) = super::metrics::global() {
        metrics.reload_succeeded(rules);
    }
    if let Some(stats) = super::reference::stats::global() {
        stats.config_loaded(true);
    }
}

/// A reload was refused; the previous rules stay in force.
pub fn reload_failed() {
    if let Some(metrics) = super::metrics::global() {
        metrics.reload_failed();
    }
    if let Some(stats) = super::reference::stats::global() {
        stats.config_loaded(false);
    }
}
