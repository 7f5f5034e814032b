#include "stagehand/backend/app_config.h"
