#include "stagehand/backend/scheduler_metrics.h"
