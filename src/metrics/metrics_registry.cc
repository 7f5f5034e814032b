#include "stagehand/metrics/metrics_registry.h"
