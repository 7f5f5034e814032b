#include "stagehand/http/auth.h"
